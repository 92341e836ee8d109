/* bridge_send.c: a bridge file over the fixture's 30 lines, with a struct bridge of 4 members
 * (two declared together, one a nested struct). */
struct store;

struct bridge {
	struct store *st;
	int a, b; /* two members; "c, d" in a comment is none */
	struct {
		int x;
		int y;
	} sub;
};
int send_1 = 1;
int send_2 = 2;
int send_3 = 3;
int send_4 = 4;
int send_5 = 5;
int send_6 = 6;
int send_7 = 7;
int send_8 = 8;
int send_9 = 9;
int send_10 = 10;
int send_11 = 11;
int send_12 = 12;
int send_13 = 13;
int send_14 = 14;
int send_15 = 15;
int send_16 = 16;
int send_17 = 17;
int send_18 = 18;
int send_19 = 19;
int send_20 = 20;
int send_21 = 21;
int send_22 = 22;
int send_23 = 23;
