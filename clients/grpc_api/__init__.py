"""Controller gRPC API: controller.proto and the stubs generated from it (used by the SDK and the controller)."""
