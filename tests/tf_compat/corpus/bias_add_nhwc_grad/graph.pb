
:
vPlaceholder*
dtype0*
shape:
.
bPlaceholder*
dtype0*
shape:
8
BiasAddBiasAddvb*
T0*
data_formatNHWC
à
dy0Const*
dtype0*Ä
valueºB·" Ã¿dUƒ¿X¢¿#Ò¿mPi¿³¾º¿Ñ1@¿Ž˜¢?«6?ù»í¿8¤D¿àmâ?et±¾x?Iá{¿Áh¿eÐÀS¿¶ÃÜ½Ä»ªîI¿p®p>H4¿ª=ö¾>¾N@ìª‚?ÉV’?]©´¿‰>…>þX>ñD¥¿äKì¾ß??àÑÀ¤þÎ¿(I?¥òÝ>w¸•?1tA¾¯c>Ê¿‰ÈÄ¼7 ¿=¨¡¿7¿´ÃÕ¿T½‰¼†´¿/=ûÓ;¼Ã ™?£¾©2w¾KJ?Ú«r¿äB? $—¿‘H@6BÅ?¶«Õ¾½Dž¾Å >&Ù>N|"?ÌâŸ=j¬¼w'K>ö‰®¿ç@1¿ñ¢Î?¥r?ræ½
I
gradients/grad_ys_0Identitydy0*
T0*
_class
loc:@BiasAdd
‚
"gradients/BiasAdd_grad/BiasAddGradBiasAddGradgradients/grad_ys_0*
T0*
_class
loc:@BiasAdd*
data_formatNHWC
-
dx0Identitygradients/grad_ys_0*
T0
<
dx1Identity"gradients/BiasAdd_grad/BiasAddGrad*
T0"ª