"""Pure salience logic: pulses, invariants, kernel, propagation, outcomes, sweep math.

Nothing in this package performs I/O or imports another package of the project.
"""
