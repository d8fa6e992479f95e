"""Typed statements on `reminders` (`sql/reminders.sql`): the API's CRUD, the claim, the
sender's advance, the suppression pauses and the maintenance rescues. Every function runs
on the caller's `Connection` and never commits; reminders are locked in id order."""

from __future__ import annotations


# --- API: create, read, list, change, cancel ---------------------------------------------------


# --- Coordinator and maintenance: claim, rescue, backlog ---------------------------------------


# --- Sender: read for send, lock and advance ---------------------------------------------------


# --- Suppression: pause, refuse, resume --------------------------------------------------------
