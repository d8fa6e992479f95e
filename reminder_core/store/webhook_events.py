"""Typed statements on `webhook_events` (`sql/webhook_events.sql`): verified provider
events, stored once. Every function runs on the caller's `Connection` and never commits."""

from __future__ import annotations


# --- Webhooks and the rematcher ----------------------------------------------------------------


# --- Retention ---------------------------------------------------------------------------------
