"""The controller: topic administration, replica placement and producer-id blocks, through the
metadata store."""
