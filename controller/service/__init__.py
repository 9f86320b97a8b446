"""The controller's service layer: workflows and queries behind the gRPC API, over the metadata store.

Modules by concern (dependencies point down):

    services                  ControllerServices: every service over one ControllerContext
    scopes                    scopes, stream listings (with tags)
    stream_creation, stream_update, stream_sealing, stream_deletion, truncation, scaling
                              the stream workflows, each idempotent and re-drivable
    segment_queries           tail, epochs, head, successors, cuts, validity, getURI
    reader_groups, writer_marks, key_value_tables
                              Java-client features (controller-managed groups, watermark marks, KVTs)
    retention                 time/size retention: periodic stream cuts, truncation at the chosen one
    transaction_coordination  what sealing needs from transactions (abort open ones, wait)
    workflows                 WorkflowRunner: per-stream exclusion, persisted intents, re-drive
    stream_access, stream_cut_rules, configuration, payloads, segment_calls, paging, fault_points
                              shared helpers
    context, errors           ControllerContext and the typed operating errors
    messages                  protobuf <-> service values, for the gRPC layer (controller/grpc_service.py)
    transactions              TransactionService (transaction_* modules: ids, index, policy, jobs, workers)
"""
