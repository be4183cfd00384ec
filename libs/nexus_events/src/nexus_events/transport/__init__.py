"""Moving events over NATS JetStream: the bus, publishing, consuming, following, replay,
projections and the request helpers built on them."""
