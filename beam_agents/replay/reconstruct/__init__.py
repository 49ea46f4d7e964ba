"""Floor 2 — the activation to re-run, fully determined: target, clock, trigger, pre-state.

Modules, and what each gives the floors above:

    plan      the target and its pre-state, and whether the inputs belong together
              (plan_replay, Plan; resumed_continuation: the continuation a resume consumed)
    pending   the pending intents an older activation saw, rebuilt and verified

It reads ``inputs`` (the traces' facts) and nothing of the other folders.
"""
