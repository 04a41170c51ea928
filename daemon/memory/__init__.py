"""What a memory is and becomes: admission, confidence, credit and learning, forgetting, limits, rebuild."""
