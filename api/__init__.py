"""The head node's transports: REST (/v1), gRPC admin, and their shared error mapping."""
