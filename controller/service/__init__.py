"""The controller's service layer: workflows and queries behind the gRPC API, over the metadata store."""
