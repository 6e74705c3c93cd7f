
2
xPlaceholder*
dtype0*
shape
:
2
	LeakyRelu	LeakyRelux*
T0*
alpha%š™™>
”
dy0Const*
dtype0*y
valuepBn"`¬2`¾¾RÕ¾oxò¿Ÿ«)¾õ}ï>ENF?ïèå¾ûü
?"¼=Qæ|?2êµ>*³?/T¿J¼¿§†À, ‚?$X¶=z¡¿7;f?C7¿³?ÿ3¸=š7í¾ Ø>
K
gradients/grad_ys_0Identitydy0*
T0*
_class
loc:@LeakyRelu
†
&gradients/LeakyRelu_grad/LeakyReluGradLeakyReluGradgradients/grad_ys_0x*
T0*
_class
loc:@LeakyRelu*
alpha%š™™>
@
dx0Identity&gradients/LeakyRelu_grad/LeakyReluGrad*
T0"ª