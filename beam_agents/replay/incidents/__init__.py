"""Floor 6 — commands over many activations: ``ls``, incident bundles, ``check``.

Modules, and what each gives the command line, the pipeline and the package's face:

    listing        ``ls``: a key's traced activations, and which a snapshot replays
                   (list_activations, render_listing, listing_lines, listing_json,
                   write_listing_json; LS_JSON_SCHEMA, AFTER_SNAPSHOT, INCOMPLETE)
    bundle         incident bundles: make, load (every part checked), replay options, consent
                   for their recorded code (make_bundle, load_bundle, bundle_options, Bundle,
                   check_consent, recorded_code, RecordedCodeNotImported)
    check          ``check``: every activation of many bundles replayed (check_bundles)
    check_rows     its rows and their typed causes (CheckRow, CheckReport, CheckCause,
                   result_row, refused_row)
    check_workers  replaying them, in this process or in isolated worker processes
    check_render   its table, ``--json`` and JUnit XML (render_check, check_json,
                   write_check_json, render_junit; CHECK_JSON_SCHEMA)
"""
