"""Floor 2 — what contains agent code while it is imported and re-run.

Modules, and what each gives the floors above:

    guard       the audit hook refusing network, processes, signals, native code and file
                writes (block_network, NetworkAttempt, ExitRefused, NETWORK_OPERATIONS,
                PROCESS_OPERATIONS; isolate_process, late_attempts, still_running,
                own_file_writes, end_process, protect_descriptor for the console script
                and check's workers;
                provider_network: a fork's --fork-provider, the one network it may open;
                template_fork, template_kill for check's templates; record_operations,
                Operation, OperationKind: the same hook reporting instead of refusing, for
                the doctor)
    time_limit  agent code waited for at most so long in a thread of its own
                (within_limit, RerunRanPast, ImportRanPast, ExitRanPast, RAN_PAST,
                idle_agent_threads)
    process_exit  what agent code runs at interpreter exit, run before the judgement in a
                process that ends (run_exit, watch_agent_modules, remember_finalizable,
                drop_exit_callbacks)
    watchdog    the console script's last resort past twice the limit, a process agent
                code cannot reach (start)

It reads only the vocabulary and the core.
"""
