"""What the agent is given beside the question: verified answers and notes (knowledge), the tables a big schema's list shows."""
