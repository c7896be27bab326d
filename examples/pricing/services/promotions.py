def get_discount(db, promo_code):
    promo = db.execute(
        "SELECT discount_pct FROM promotions WHERE code = ?", (promo_code,)
    ).fetchone()
    return promo[0] / 100
