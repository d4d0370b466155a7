"""Version-guarded runtime patches of upstream behaviour; each is described in ``patches/<name>.md`` at the repo root.

A patch applies only to the exact upstream release it was written for and is removed when upstream ships the fix.
"""
