def create_order_response(order):
    response = {
        "total_price": order.total_price,
        "currency": order.currency,
        "receipt_to": order.email,
    }
    return response
