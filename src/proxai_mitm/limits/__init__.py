"""Rate limits: cooldowns (in the process, or shared through Redis) and key pools."""
