"""The accounts wing: users, roles, API tokens and the sign-in throttle."""
