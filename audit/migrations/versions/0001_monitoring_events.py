"""The monitoring events table.

Revision ID: 0001
Revises:
Create Date: 2026-11-24
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "monitoring_events",
        sa.Column("event_id", sa.LargeBinary(16), primary_key=True),
        sa.Column("tier", sa.String(32), nullable=False),
        sa.Column("datacenter", sa.String(128), nullable=False),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("window_begin_ms", sa.BigInteger, nullable=False),
        sa.Column("window_end_ms", sa.BigInteger, nullable=False),
        sa.Column("message_count", sa.BigInteger, nullable=False),
        sa.Column("byte_count", sa.BigInteger, nullable=False),
        sa.Column("no_time_count", sa.BigInteger, nullable=False),
        sa.Column("malformed_count", sa.BigInteger, nullable=False),
        sa.Column("checksum_hi", sa.BigInteger, nullable=False),
        sa.Column("checksum_lo", sa.BigInteger, nullable=False),
        sa.Column("unique_count", sa.BigInteger, nullable=True),
        sa.Column("latency_json", sa.Text, nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("service", sa.String(255), nullable=False),
        sa.Column("event_time_ms", sa.BigInteger, nullable=False),
        sa.Column("received_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_events_topic_window", "monitoring_events",
                    ["topic", "window_begin_ms"])


def downgrade() -> None:
    op.drop_index("ix_events_topic_window", "monitoring_events")
    op.drop_table("monitoring_events")
