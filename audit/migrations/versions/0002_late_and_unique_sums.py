"""The sums of first-seen ids and of late ids (audit/compare.py places late
copies with them): unique_checksum, late_unique_count, late_unique_checksum,
each checksum as two 32-bit halves like checksum_hi/lo. Rows of older
counters keep NULL there.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

COLUMNS = ("unique_checksum_hi", "unique_checksum_lo", "late_unique_count",
           "late_checksum_hi", "late_checksum_lo")


def upgrade() -> None:
    with op.batch_alter_table("monitoring_events") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.BigInteger, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("monitoring_events") as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)
