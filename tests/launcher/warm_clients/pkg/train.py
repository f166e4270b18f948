"""The tutorial as a module: `ddprun -m pkg.train SNAPSHOT EPOCHS`, run from the clients' folder
(with -m, sys.path[0] is the current folder, where tutorial.py is)."""
import tutorial

if __name__ == "__main__":
    tutorial.main()
