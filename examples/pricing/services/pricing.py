from dataclasses import dataclass, field


@dataclass
class Item:
    sku: str
    price: float


@dataclass
class Order:
    items: list = field(default_factory=list)
    currency: str = "GBP"
    total_price: float = 0.0
    email: str = ""


def calculate_total(items, discount):
    subtotal = sum(i.price for i in items)
    total = subtotal * (1 - discount)
    return round(total, 2)
