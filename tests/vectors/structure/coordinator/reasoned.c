/*
 * reasoned.c: over the fixture's 40 lines with a reason.
 * Size: one table that reads best whole.
 */
int reasoned_1 = 1;
int reasoned_2 = 2;
int reasoned_3 = 3;
int reasoned_4 = 4;
int reasoned_5 = 5;
int reasoned_6 = 6;
int reasoned_7 = 7;
int reasoned_8 = 8;
int reasoned_9 = 9;
int reasoned_10 = 10;
int reasoned_11 = 11;
int reasoned_12 = 12;
int reasoned_13 = 13;
int reasoned_14 = 14;
int reasoned_15 = 15;
int reasoned_16 = 16;
int reasoned_17 = 17;
int reasoned_18 = 18;
int reasoned_19 = 19;
int reasoned_20 = 20;
int reasoned_21 = 21;
int reasoned_22 = 22;
int reasoned_23 = 23;
int reasoned_24 = 24;
int reasoned_25 = 25;
int reasoned_26 = 26;
int reasoned_27 = 27;
int reasoned_28 = 28;
int reasoned_29 = 29;
int reasoned_30 = 30;
int reasoned_31 = 31;
int reasoned_32 = 32;
int reasoned_33 = 33;
int reasoned_34 = 34;
int reasoned_35 = 35;
int reasoned_36 = 36;
int reasoned_37 = 37;
int reasoned_38 = 38;
int reasoned_39 = 39;
int reasoned_40 = 40;
int reasoned_41 = 41;
