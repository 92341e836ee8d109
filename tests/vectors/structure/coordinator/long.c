/* long.c: one function over the fixture's 10 lines, one within. */
static int helper(int x)
{
	return x + 1;
}

int long_fn(int x)
{
	x = helper(x);
	x = helper(x);
	x = helper(x);
	x = helper(x);
	x = helper(x);
	x = helper(x);
	x = helper(x);
	x = helper(x);
	return x;
}
