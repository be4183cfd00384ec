"""The gateway's PostgreSQL store (schema ``channels``), one module per table group: inbound
outbox and dedupe keys, run origins and posts, relayed approvals, flow runs and their gates,
send records, delegations, and the allowlist folded from pairing events.

Every write is idempotent (ON CONFLICT), so a redelivered event changes nothing twice.
"""

from nexus_channel_gateway.store.approvals import RelayedApproval
from nexus_channel_gateway.store.conversations import Conversation, conversation_id_for
from nexus_channel_gateway.store.delegations import Delegation
from nexus_channel_gateway.store.flows import FlowRun
from nexus_channel_gateway.store.gateway_store import GatewayStore
from nexus_channel_gateway.store.pairing import Pairing
from nexus_channel_gateway.store.schema import CHANNELS_SCHEMA

__all__ = [
    "CHANNELS_SCHEMA",
    "Conversation",
    "Delegation",
    "FlowRun",
    "GatewayStore",
    "Pairing",
    "RelayedApproval",
    "conversation_id_for",
]
