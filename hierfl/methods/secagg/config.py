"""``subprotocol: {cloud: {name: secagg}}`` / ``{name: secagg_plus}``: secure aggregation as a sub-protocol.

SecAgg (Bonawitz et al., CCS 2017) and SecAgg+ (Bell et al., CCS 2020) run their four message rounds between
an aggregation point and the senders of its round before it aggregates, as real transfers on the emulated
links; each round's bytes and crypto work come from :mod:`hierfl.methods.secagg.math`, the work charged at
each device's tier's crypto rates (``crypto:`` of hierfl/profiles/tiers.yaml) and the aggregator's
(``servers.<tier>.tier``). A participant lost before it sent its masked input is left out; one lost in the
unmasking round keeps its input (the others' shares recover its masks); fewer than the threshold left:
the round aggregates nothing. Each sender's update goes up once, as its masked input of Round 2
(``carries_inputs``: the ordinary upload before the instance moves no bytes). Nothing is encrypted in a
run: the arithmetic is checked on its own (:mod:`hierfl.methods.secagg.math_masking`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, PositiveInt

from hierfl.channels.math.field import MAX_FIELD_BITS, field_bits
from hierfl.config.errors import Problem
from hierfl.core.rng import stream
from hierfl.methods.secagg.math import (client_round, default_bits, find_degree_threshold, full_threshold,
                                        harary_neighbours, server_unmask)
from hierfl.subprotocol.config import SUBPROTOCOLS, SubProtocolConfig, senders_are_edge_servers
from hierfl.subprotocol.math import RoundView, SubRound

if TYPE_CHECKING:
    from hierfl.scenario.schema import Scenario

__all__ = ["SecAggConfig", "SecAggPlusConfig"]


# the last round's (view, config, graph, alive set, lost set): see _SecAggBase._round_sets
_ROUND_MEMO: dict[str, tuple[Any, ...]] = {}


@lru_cache(maxsize=64)
def _graph(seed: int, instance: int, participants: tuple[int, ...], degree: int) -> dict[int, tuple[int, ...]]:
    """The instance's neighbour graph: the participants on a ring in an order drawn from the run's stream
    ``secagg.ring`` (a random Harary graph), or the complete graph."""
    if degree >= len(participants) - 1:
        return harary_neighbours(participants, degree)
    order = [participants[i] for i in stream(seed, "secagg.ring", instance).permutation(len(participants))]
    return harary_neighbours(order, degree)


class _SecAggBase(SubProtocolConfig):
    """What SecAgg and SecAgg+ share: the encoding, the primitives, the refusals."""

    # the masked input of Round 2 is the sender's update (y_u = x_u + masks, m elements at b bits, Bonawitz et
    # al. 2017 §4): the ordinary upload before the instance moves no bytes, so each update is sent once
    carries_inputs: ClassVar[bool] = True

    quant_levels: PositiveInt = Field(default=65536, description="Q: quantisation levels per coordinate; the "
                                      "field width is b = ⌈log2(n·Q)⌉ unless bits is set [D]")
    bits: int | None = Field(default=None, ge=1, le=62, description="b: bits per masked element (null: "
                             "⌈log2(n·Q)⌉, at most 62) [D]")
    key_agreement: Literal["ecdh_p256", "ecdh_x25519"] = Field(
        default="ecdh_p256", description="the key agreement charged (P-256: the production encoding) [V]")
    prg: Literal["aes_ctr", "chacha20"] = Field(default="aes_ctr", description="the PRG charged for masks "
                                                "(AES-CTR [V]; chacha20 for tiers without AES instructions [D])")

    @classmethod
    def example(cls) -> _SecAggBase:
        """A minimal valid config for devices without tiers: phone_high's crypto rates, 10 GFLOP/s."""
        return cls(sender_gflops=10.0, sender_crypto_tier="phone_high")

    # -- the instance's graph and threshold ---------------------------------------------------------------------
    def degree_threshold(self, n: int) -> tuple[int, int]:
        """(neighbours per client, Shamir threshold) of an instance of ``n`` participants."""
        raise NotImplementedError

    def threshold(self, participants: int) -> int:
        """The Shamir threshold: fewer participants left after any round abort the instance."""
        return self.degree_threshold(participants)[1]

    def _neighbours(self, view: RoundView) -> dict[int, tuple[int, ...]]:
        return _graph(view.seed, view.instance, view.participant_ids, self.degree_threshold(view.participants)[0])

    def _m_bits(self, view: RoundView) -> tuple[int, int]:
        # every float32 value of a model message is one field element, plus the weight (Flower's practice); a
        # quantising upload channel has put the values on its own integer grid already (quantise, then mask):
        # the field is as wide as n senders' sums of its levels need, ⌈log2(n·L)⌉
        if self.bits is not None:
            bits = self.bits
        elif view.field_levels is not None:
            bits = field_bits(view.participants, view.field_levels)
        else:
            bits = default_bits(view.participants, self.quant_levels)
        return view.model_bytes // 4 + 1, bits

    # -- the rounds -------------------------------------------------------------------------------------------
    def plan(self, view: RoundView) -> SubRound | None:
        """Round ``view.round`` (its bytes and work for a client that lost no neighbour; each sender's own
        comes from :meth:`plan_sender`), the server's work at the end of Unmasking."""
        if view.round > 3:
            return None
        m, bits = self._m_bits(view)
        t = self.threshold(view.participants)
        base = client_round(view.round, 0, t, m, bits, self.key_agreement, self.prg)
        server = SubRound(base.name)
        if view.round == 3:
            lost = view.lost_last_ids
            cost = server_unmask(view.alive_ids, lost, self._neighbours(view), t, m, bits, self.key_agreement,
                                 self.prg)
            server = SubRound(base.name, server_ops=cost.server_ops, server_flops=cost.server_flops)
        return SubRound(base.name, up_bytes=base.up, down_bytes=base.down, sender_ops=base.client_ops,
                        server_ops=server.server_ops, server_flops=server.server_flops,
                        keeps_lost_inputs=view.round == 3)

    def _round_sets(self, view: RoundView) -> tuple[dict[int, tuple[int, ...]], frozenset[int], frozenset[int]]:
        """The graph and the alive / just-lost sets of ``view``, built once per round: the driver asks
        :meth:`plan_sender` for every sender with the same view, and rebuilding them per sender made a
        round cost O(n²) (minutes at n = 10,000 for SecAgg+, whose own work is O(n·k))."""
        memo = _ROUND_MEMO.get("view")
        if memo is None or memo[0] is not view or memo[1] is not self:  # kept in the memo: their ids stay unique
            memo = (view, self, self._neighbours(view), frozenset(view.alive_ids), frozenset(view.lost_last_ids))
            _ROUND_MEMO["view"] = memo
        return memo[2], memo[3], memo[4]

    def plan_sender(self, view: RoundView, sender: int, plan: SubRound) -> SubRound:
        """``sender``'s bytes and work with its neighbours that are still taking part."""
        m, bits = self._m_bits(view)
        t = self.threshold(view.participants)
        graph, alive, lost = self._round_sets(view)
        mine = graph[sender]
        k = sum(1 for v in mine if v in alive)
        dead = 0
        if view.round == 3:  # the neighbours that reached R2: alive now, or lost during it
            dead = sum(1 for v in mine if v in lost)
            k += dead
        cost = client_round(view.round, k, t, m, bits, self.key_agreement, self.prg, dead)
        return SubRound(plan.name, up_bytes=cost.up, down_bytes=cost.down, sender_ops=cost.client_ops,
                        sender_flops=cost.client_flops, server_ops=plan.server_ops, server_flops=plan.server_flops,
                        keeps_lost_inputs=plan.keeps_lost_inputs)

    # -- what it cannot run with -------------------------------------------------------------------------------
    def problems(self, key: str, scenario: Scenario) -> list[Problem]:
        """Crypto rates for every tier it charges; no rule, method or channel that needs individual updates."""
        out = super().problems(key, scenario)
        tier = key.rsplit(".", 1)[1]
        from hierfl.devices.tiers import shipped_tiers

        specs = {**shipped_tiers(), **scenario.devices.custom_tiers}
        if senders_are_edge_servers(scenario, tier):
            pass  # edge servers: charged at servers.edge's tier's rates
        elif scenario.devices.tiers is None:
            if self.sender_crypto_tier is None or self.sender_crypto_tier not in specs \
                    or specs[self.sender_crypto_tier].crypto is None:
                out.append(Problem(f"{key}.sender_crypto_tier", f"{self.name} charges its crypto at each device's "
                                   "tier's rates, but the devices have no tiers (devices.tiers); allowed: a tier "
                                   f"with crypto rates ({', '.join(sorted(t for t in specs if specs[t].crypto))})",
                                   self.sender_crypto_tier))
        else:
            for t in sorted(scenario.devices.tiers):
                if t in specs and specs[t].crypto is None:
                    out.append(Problem(f"devices.custom_tiers.{t}.crypto", f"{self.name} needs the crypto rates of "
                                       "every device tier (ecdh_x25519_ms, ecdh_p256_ms, aes_ctr_mb_s, aes_gcm_mb_s, "
                                       "chacha20_mb_s, shamir_muladd_ns)", None))
        for t in sorted({tier, *(("edge",) if senders_are_edge_servers(scenario, tier) else ())}):
            server_tier = getattr(scenario.servers, t).tier
            if specs[server_tier].crypto is None:  # (every shipped tier has them; kept for tiers added later)
                out.append(Problem(f"servers.{t}.tier", f"{self.name} needs crypto rates for the servers' tier",
                                   server_tier))
        rule = scenario.aggregation.at(tier)
        if not rule.is_mean:
            out.append(Problem(f"aggregation.{tier}.name", f"{self.name} hands the {tier} only the sum of the "
                               "updates; a robust rule needs each update; allowed: mean", rule.name))
        why = getattr(scenario.protocol, "reads_each_update", None) or getattr(
            scenario.training.trainer, "reads_each_update", None)
        if why:
            out.append(Problem(f"{key}.name", f"{self.name} hands the aggregator only the sum of the updates, but "
                               f"this method {why}; allowed: none", self.name))
        out.extend(self._channel_problems(key, tier, scenario))
        return out

    def _channel_problems(self, key: str, tier: str, scenario: Scenario) -> list[Problem]:
        """The senders' upload channel must put every sender's values on one shared integer grid (quantise, then
        mask) and the field must hold the sum of the most senders an instance can have without wrapping."""
        edges = senders_are_edge_servers(scenario, tier)
        direction = "edge_uplink" if edges else "device_uplink"
        honoured = tuple(getattr(scenario.protocol, "channel_links", ()))
        ch = scenario.channels.resolved(honoured).get(direction)
        if ch is None:
            return []
        where = direction if getattr(scenario.channels, direction) is not None else "uplink"
        levels = ch.field_levels()
        if levels is None:
            return [Problem(f"channels.{where}", f"{self.name} sums masked integers in a finite field; channel "
                            f"{ch.name!r} cannot be summed there ({ch.field_refusal()}); allowed: none, fp16, qsgd "
                            "with shared_scale", ch.name)]
        out: list[Problem] = []
        most = (scenario.topology.edge_servers or 1) if edges else scenario.devices.count
        need = field_bits(most, levels)
        if need > MAX_FIELD_BITS:
            out.append(Problem(f"channels.{where}", f"the sum of {most} senders of {levels} levels each (channel "
                               f"{ch.name!r}) needs a {need}-bit field, above {MAX_FIELD_BITS} bits; allowed: fewer "
                               "levels", ch.name))
        if self.bits is not None and self.bits < need:
            out.append(Problem(f"{key}.bits", f"the sum of up to {most} senders of {levels} levels each (channel "
                               f"{ch.name!r}) needs {need} bits; fewer would wrap around; allowed: null or at least "
                               f"{need}", self.bits))
        if "quant_levels" in self.model_fields_set:
            out.append(Problem(f"{key}.quant_levels", f"channel {ch.name!r} quantises the values before masking "
                               "(its own levels set the field width): quant_levels would be ignored; allowed: "
                               "unset", self.quant_levels))
        return out


@SUBPROTOCOLS.register
class SecAggConfig(_SecAggBase):
    """``{name: secagg, threshold: null}``: SecAgg over the complete graph (every client shares with every other).

    ``shamir_threshold`` null: ``min(n, ⌈2n/3⌉ + 1)`` [D]; it must exceed 1 (Shamir sharing needs two shares).
    """

    name: Literal["secagg"] = "secagg"
    shamir_threshold: int | None = Field(default=None, ge=2, description="t: survivors needed to unmask (null: "
                                         "min(n, ⌈2n/3⌉+1)) [D]")

    def degree_threshold(self, n: int) -> tuple[int, int]:
        """(n − 1, t)."""
        t = full_threshold(n) if self.shamir_threshold is None else int(self.shamir_threshold)
        return max(n - 1, 0), max(t, 2)


@SUBPROTOCOLS.register
class SecAggPlusConfig(_SecAggBase):
    """``{name: secagg_plus, corrupt_rate: 0.05, dropout_rate: 0.05, adversary: curious}``: SecAgg+ over a
    random Harary graph whose degree and threshold the production finder picks for the instance's ``n``
    (σ = 40, η = 20); ``degree`` / ``shamir_threshold`` set them instead. Where no degree below ``n − 1`` passes
    (a handful of clients), the complete graph with SecAgg's threshold [D]."""

    name: Literal["secagg_plus"] = "secagg_plus"
    corrupt_rate: float = Field(default=0.05, ge=0.0, lt=1.0, description="γ: share of corrupt clients [D]")
    dropout_rate: float = Field(default=0.05, ge=0.0, lt=1.0, description="δ: share of clients expected to drop "
                                "out [D: the spec's floor; a measured rate is not implemented]")
    adversary: Literal["curious", "semi_malicious"] = Field(default="curious", description="the server's threat "
                                                            "model [D]")
    degree: int | None = Field(default=None, ge=2, description="k: neighbours per client, even (null: the finder's)")
    shamir_threshold: int | None = Field(default=None, ge=2, description="t: shares needed to unmask (null: "
                                         "the finder's)")

    def problems(self, key: str, scenario: Scenario) -> list[Problem]:
        """Feasible rates (γ + δ ≤ 0.9, or γ + 2δ ≤ 0.9 against a semi-malicious server), an even degree."""
        out = super().problems(key, scenario)
        load = self.corrupt_rate + (2 if self.adversary == "semi_malicious" else 1) * self.dropout_rate
        if load > 0.9 + 1e-12:
            out.append(Problem(f"{key}.dropout_rate", f"corrupt_rate + {'2·' if self.adversary != 'curious' else ''}"
                               f"dropout_rate = {load:.3g} is infeasible; allowed: at most 0.9", self.dropout_rate))
        if self.degree is not None and self.degree % 2:
            out.append(Problem(f"{key}.degree", "a Harary graph's degree is even; allowed: an even number ≥ 2",
                               self.degree))
        return out

    def degree_threshold(self, n: int) -> tuple[int, int]:
        """The finder's (k, t) for ``n``, or the configured ones."""
        found = _find(n, self.corrupt_rate, self.dropout_rate, self.adversary == "semi_malicious")
        k, t = found if found is not None else (max(n - 1, 0), full_threshold(n))
        if self.degree is not None:
            k = self.degree
        if self.shamir_threshold is not None:
            t = int(self.shamir_threshold)
        return k, max(t, 2)


@lru_cache(maxsize=256)
def _find(n: int, corrupt: float, dropout: float, semi: bool) -> tuple[int, int] | None:
    return find_degree_threshold(n, corrupt, dropout, semi) if n > 3 else None
