"""node_agent."""
