"""A fake libtpu runtime metric service (gRPC, from tpu-info's own proto) and a fake TPU host."""
