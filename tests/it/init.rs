//! `dev init` on this repository guesses the components its own
//! `dev-env.yaml` declares.

use dev_env::config::Config;
use dev_env_tests::repo_root;

#[test]
fn init_guesses_the_components_of_this_repositorys_own_file() {
    let root = repo_root();
    let guess = dev_env::init::guess(&root).expect("a guess for this workspace");
    let text = dev_env::init::render(&guess);
    // Read as if it were the repository's file: paths resolve the same.
    let guessed =
        Config::parse(&root.join("dev-env.yaml"), &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let declared = Config::load(&root.join("dev-env.yaml")).expect("the repository's file");
    assert_eq!(
        guessed.components, declared.components,
        "dev init wrote:\n{text}"
    );
    assert_eq!(guessed.manifests, declared.manifests);
    assert_eq!(guessed.cluster.provider, declared.cluster.provider);
    assert_eq!(guessed.cluster.sim_source, Some(root));
}
