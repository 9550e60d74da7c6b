"""wscc: its clustering math (:mod:`.math`: affinity propagation on the similarity of the devices' updates)."""
