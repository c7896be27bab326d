"""The web console: server-rendered pages under /console, in the same app as the API, for the
people the API serves: on-call engineers and security teams open a recorded run, land on its
crash or its last output, and follow provenance to the root cause; auditors read the audit
log and its chain's state; admins manage their tenant's users and tokens.

    _install     how the app serves it (routes, headers, the way back to sign-in)
    _pages       the routes (thin: each parses its form, calls one plain function, renders)
    _sign_ins    browser sign-ins: the cookie, its time-outs, the CSRF tokens bound to it
    _forms       urlencoded forms, read with limits, and their CSRF check
    _headers     the security headers of every console response (CSP, framing, caching)
    _walk        each move of the provenance view, asked through the question contract
    _trail       what a session's walk has seen, in this server's memory only
    _views       what a view shows, worked out from the answers
    _lists       runs, a run's sessions and the audit log, filtered and paged
    _admin       a tenant's users and tokens
    _render      templates (autoescaped, always) and static files

It asks, opens and closes sessions only through sealtrace.server._session_actions, and
signs people in only through sealtrace.server._sign_in, exactly as the API does, so the role
table (sealtrace.server._auth.PERMISSIONS), the refusals and the audit events are the API's.
It must never mark recorded text safe, put a recorded value in a URL, the database, Redis or
a log, or accept a state-changing request without its sign-in's CSRF token.
"""
