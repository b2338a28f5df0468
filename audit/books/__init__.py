"""The books: the reconciliation that balances every tier's counts into Delta tables, its record checks,
and the alerts sent from those tables. Imports the contract, settings and io."""
