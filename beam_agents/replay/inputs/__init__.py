"""Floor 1 — replay's inputs, read and checked: every failure a refusal naming the input.

Modules, and what each gives the floors above:

    sources        the bytes of an input: paths, ``-`` (stdin), bytes given, size caps
                   (describe_source, open_regular, read_source, size_cap, too_large,
                   file_kind)
    snapshot       the snapshot parsed, version-checked, migrated in memory
                   (load_snapshot_source, load_snapshot_message)
    envelopes      the triggering envelope: one file (``--event``) or picked out of topic
                   dumps (``--events``) by traced id and sha256
                   (load_event_source, load_event_message, load_envelopes, write_envelope_stream)
    traces         THE one trace scanner (trace_events, with one duplicate-event rule), what
                   it says about one key (scan_traces, TracedKey, TracedSeq), whether a traced
                   activation is whole (check_complete), the first events of one activation
                   read before the rest (first_events); TraceMessages, TraceSource, seq_ranges
    agent_code     the only place agent code is imported (import_object, imported_already,
                   no_bytecode, ImportFailed), and where a path would import from (locate,
                   import_root, ancestors)
    replay_inputs  ReplayInputs: one replay's inputs as objects, what the engine runs on;
                   LoadedFork: a fork's value and provider, read and imported

Nothing here imports another folder of replay: only the vocabulary and the core.
"""
