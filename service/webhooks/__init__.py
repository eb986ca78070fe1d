"""Webhooks from a transactional outbox (docs/webhooks.md).

The change writes its event into `webhook_outbox` in its own transaction (migration 0027's
triggers, erase_subject, note_extraction_completed); the delivery worker (`worker.py`) fans the
events out into one delivery per subscription and posts each, signed (`signing.py`), to a URL
checked against the private networks (`urls.py`) at subscription and again before each attempt.
"""
