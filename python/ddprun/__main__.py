"""`python -m ddprun ...`: the same as the `ddprun` command."""
from ddprun._launch import main

main()
