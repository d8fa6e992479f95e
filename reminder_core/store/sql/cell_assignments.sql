-- Statements on `cell_assignments` (docs/design.md, "Cells"): the cell directory, one row
-- per user. Typed wrappers: reminder_core/store/cell_assignments.py.

-- name: cell_assignment_get
-- The cell :user_id lives in; no row when the user has none yet.
SELECT cell FROM cell_assignments WHERE user_id = :user_id;

-- name: cell_assignment_insert
-- Assign :user_id to :cell unless a concurrent request assigned them first (then no row:
-- the caller reads the winner's cell).
INSERT INTO cell_assignments (user_id, cell, assigned_at)
VALUES (:user_id, :cell, :now)
ON CONFLICT (user_id) DO NOTHING
RETURNING cell;

-- name: cell_assignment_move
-- Point :user_id at :to_cell, where they still live in :from_cell (no row otherwise: the
-- switch was made before, or they live elsewhere).
UPDATE cell_assignments
SET cell = :to_cell, assigned_at = :now
WHERE user_id = :user_id AND cell = :from_cell
RETURNING cell;
