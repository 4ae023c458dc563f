"""Pydantic schemas: the vocabulary every other module speaks (ARCHITECTURE section 1)."""

from planner.schemas.estimate import CommBytes, Estimate, EstimateConfig, GroupLinks, MemoryBreakdown, TimeBreakdown
from planner.schemas.hardware import GPU, ClusterSpec, HardwareProfile, Interconnect
from planner.schemas.job import JobSpec
from planner.schemas.model import ModelSpec
from planner.schemas.parallel import ParallelConfig

__all__ = [
    "GPU",
    "ClusterSpec",
    "CommBytes",
    "Estimate",
    "EstimateConfig",
    "GroupLinks",
    "HardwareProfile",
    "Interconnect",
    "JobSpec",
    "MemoryBreakdown",
    "ModelSpec",
    "ParallelConfig",
    "TimeBreakdown",
]
