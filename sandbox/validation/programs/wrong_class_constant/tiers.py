"""Loyalty tiers: each a class whose attributes are the tier's policy."""


class Tier:
    name = "standard"
    discount_pct = 0
    free_shipping = False


class Silver(Tier):
    name = "silver"
    discount_pct = 5


class Gold(Tier):
    name = "gold"
    discount_pct = 40  # <- planted: the policy says 4
    free_shipping = True


TIERS = {tier.name: tier for tier in (Tier, Silver, Gold)}
