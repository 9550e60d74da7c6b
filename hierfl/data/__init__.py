"""Seeded in-memory datasets and the partitioners that split them among devices."""

from hierfl.data.datasets import (
    DATASETS,
    BlobsConfig,
    DataError,
    Dataset,
    DatasetConfig,
    DigitsConfig,
    SyntheticConfig,
    SyntheticUsers,
    TeacherConfig,
    generate_synthetic,
)
from hierfl.data.files import (
    CIFAR10Config,
    EMNISTConfig,
    FashionMNISTConfig,
    FEMNISTConfig,
    MNISTConfig,
    ShakespeareConfig,
)
from hierfl.data.partition import (
    PARTITIONERS,
    DirichletConfig,
    GaussianSizesConfig,
    IIDConfig,
    NaturalConfig,
    PartitionConfig,
    ShardsConfig,
    label_distribution,
)

__all__ = [
    "CIFAR10Config",
    "EMNISTConfig",
    "FashionMNISTConfig",
    "FEMNISTConfig",
    "MNISTConfig",
    "ShakespeareConfig",
    "DATASETS",
    "PARTITIONERS",
    "BlobsConfig",
    "DataError",
    "Dataset",
    "DatasetConfig",
    "DigitsConfig",
    "DirichletConfig",
    "GaussianSizesConfig",
    "IIDConfig",
    "NaturalConfig",
    "PartitionConfig",
    "ShardsConfig",
    "SyntheticConfig",
    "SyntheticUsers",
    "TeacherConfig",
    "generate_synthetic",
    "label_distribution",
]
