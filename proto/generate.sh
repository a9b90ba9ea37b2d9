#!/usr/bin/env bash
# Regenerates the committed gRPC code from proto/memesh_proto/*.proto.
# Run after editing a .proto; the generated files are excluded from lint.
set -euo pipefail
cd "$(dirname "$0")"
PY="${PYTHON:-../.venv/bin/python}"
"$PY" -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. memesh_proto/*.proto
echo "generated: $(ls memesh_proto/*_pb2*.py*)"
