"""Terms of fuselab's robot tasks; importing a module registers its terms by name."""
