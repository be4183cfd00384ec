"""Egress of the tools: the agent's grants, enforced by a proxy the runner controls."""

from nexus_runner.egress.access import EgressAccess
from nexus_runner.egress.policy import Reserved, Verdict, check_destination, decide
from nexus_runner.egress.proxy import EgressProxy, ProxyLimits, record_safely
from nexus_runner.egress.run import run_egress

__all__ = [
    "EgressAccess",
    "EgressProxy",
    "ProxyLimits",
    "Reserved",
    "Verdict",
    "check_destination",
    "decide",
    "record_safely",
    "run_egress",
]
