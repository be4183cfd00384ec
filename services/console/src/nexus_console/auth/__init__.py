"""Who is looking: identities, sessions, CSRF and the middleware that requires them."""
