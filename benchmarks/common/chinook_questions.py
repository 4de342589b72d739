"""Eight plain questions about the bundled Chinook database, shared by the scripts that run
several real episodes at once (bench_parallel_agent, bench_batch_anatomy, bench_vote, gpu_check): one list, so their
figures compare."""

QUESTIONS = [
    "How many albums are there?",
    "Which genre has the most tracks?",
    "List the customers from Brazil.",
    "What is the total of all invoices?",
    "Which artist has the most albums?",
    "How many employees are there?",
    "What is the longest track?",
    "Which country has the most customers?",
]
