"""Idempotent producers: one table of each producer's last batch per partition, kept from the
log itself, that both protocols' produces consult (`producers`)."""
