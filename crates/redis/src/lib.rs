//! Filters stored in Redis and Redis Cluster.
