"""Controller gRPC API: controller.proto and the stubs generated from it."""
