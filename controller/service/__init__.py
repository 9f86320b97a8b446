"""The controller's service layer: workflows and queries behind the gRPC API, over the metadata store.

Services take and return plain values (records, tuples, ints, strings) and raise the typed
operating errors of ``errors``; protobuf messages and gRPC codes stay in ``controller.grpc_service``
and ``controller.grpc_messages``.

Modules by concern (dependencies point down):

    services                  ControllerServices: every service over one ControllerContext
    scopes                    scopes, stream listings (with tags)
    stream_creation, stream_update, stream_sealing, stream_deletion, truncation, scaling
                              the stream workflows, each idempotent and re-drivable
    segment_queries           tail, epochs, head, successors, cuts, validity, getURI
    reader_groups, writer_marks, key_value_tables
                              Java-client features (controller-managed groups, watermark marks, KVTs)
    retention                 time/size retention: periodic stream cuts, truncation at the chosen one
    auto_scale, auto_scale_settings
                              rate-based auto-scaling: sampling, the pure decision, its timings
    transactions/             TransactionService and its ids, index, rules, jobs, workers; what sealing
                              needs from transactions (abort open ones, wait)
    workflows                 WorkflowRunner: per-stream exclusion, persisted intents, re-drive
    stream_access, stream_cut_rules, configuration, payloads, segment_calls, paging
                              shared helpers
    retries                   every retry policy (coordination.retry.Backoff) and what each kind of loop retries
    fault_points              named crash points for tests (workflows and transaction jobs)
    context, errors           ControllerContext (with ServiceSettings) and the typed operating errors
"""
