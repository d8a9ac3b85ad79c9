"""The transaction coordinator (Kafka's TransactionCoordinator) on the coordinator runtime."""
