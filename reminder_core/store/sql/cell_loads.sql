-- Statements on `cell_loads` (docs/design.md, "Cells"): users per cell, kept with
-- `cell_assignments` in one transaction. Typed wrappers: reminder_core/store/cell_loads.py.

-- name: cell_load_list
-- Users assigned to each cell that has any.
SELECT cell, users FROM cell_loads;

-- name: cell_load_add
-- Count :users more (or fewer, negative) users in :cell.
INSERT INTO cell_loads AS l (cell, users) VALUES (:cell, :users)
ON CONFLICT (cell) DO UPDATE SET users = l.users + EXCLUDED.users;
