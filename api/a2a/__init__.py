"""The optional A2A binding: the signed agent card and the JSON-RPC SendMessage / message/send door."""
