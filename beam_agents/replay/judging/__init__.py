"""Floor 3 — the re-run compared with the trace, and the verdict: the only place one is decided.

Modules, and what each gives the floors above:

    compare      the closed normalization and the event-by-event comparison (compare_events)
    memory_reads which of the re-run's memory reads got what the original got, by the
                 snapshot's per-key provenance (unseen_reads, resolved)
    end_check    outputs, memory and memory writes against the traced ACTIVATION_END
                 (check_end, EndCheck)
    judge        the verdict, from the events, the misses, the blocked attempts, the end
                 check and the unseen reads, in that order (judge, Judgement); a fork's
                 (judge_fork, ForkRefused, fork_outcome)
    values       the plaintext behind every digest, marked (collect_values, freeze_errors,
                 value_text)
    reference    a reference run's values proved production's by the trace's digests
                 (prove_reference, ReferenceUnreadable)
    state_view   the reported-not-judged parts: the snapshot's state, the intents ledger,
                 the recorded results served (state_view, intent_ledger, served_recordings)
"""
