"""The EAGLE-3 stages on real hardware: extraction, drafter training, verification, FP8
verifiers, P-EAGLE's cost, and the seed's campaign at GPU size. Most need a GPU; each says
what it needs in its header."""
