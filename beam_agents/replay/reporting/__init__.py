"""Floor 1 — a ``ReplayResult`` rendered; nothing here decides anything.

Modules, and what each gives the floors above:

    escape     the one escaper of every human-facing surface (escape, escape_bytes), and
               each renderer's exit through it (escape_lines, escape_strings, Raw,
               md_code, md_fence; neutralize for the TUI's last net)
    labels     the one label set: verdict titles, keys, moments
               (VERDICT_TITLES, duration, key_label, key_text, not_judged, utc_time)
    text       the headless report (render_report, render_error; digest_note,
               miss_request_values, request_components_differing, memory_writes_counts,
               memory_writes_note, recording_age, unjudged_memory for the TUI's panes and the
               Markdown report;
               both_sides_text, reference_line, SIDE_MARKS: a reference run's values
               beside the re-run's; build_skew_line: the snapshot's build vs the agent's)
    json_doc   ``--json``, and the one encoding of an event pair and a value
               (render_json, write_json, pair_document, value_document, reference_values)
    json_lines the layout of every --json document, C-encoded line by line
               (write_document, dumps_line)
    markdown   the incident report for the ticket (report_markdown)
    redact     ``--redact``: every value replaced by its digest (redact)

Renderers read only the vocabulary (``result``), each other and the core: they
cannot reach the engine or the judge, so they cannot decide a verdict.
"""
