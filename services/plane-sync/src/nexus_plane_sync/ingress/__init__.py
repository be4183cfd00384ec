"""Plane -> Nexus: the webhook ingress (`PlaneIngress`), one module per kind of delivery."""

from nexus_plane_sync.ingress.plane_ingress import PlaneIngress, ingress_spec

__all__ = ["PlaneIngress", "ingress_spec"]
