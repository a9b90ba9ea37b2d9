"""Generated gRPC code for memesh (``proto/generate.sh``); do not edit by hand."""
