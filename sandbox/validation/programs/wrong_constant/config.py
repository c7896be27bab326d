"""Billing configuration, one named value per policy."""

CURRENCY = "EUR"
GRACE_DAYS = 14
INTEREST_RATE_PCT = 1.5
REMINDER_FEE_CENTS = 500
MAX_CREDIT_CENTS = 25000
LATE_FEE_CENTS = 25000  # <- planted: the policy says 2500
