#!/usr/bin/env perl
# protect_secrets.pl: keep the agent from writing or editing files that hold secrets.
#
# Event: BeforeTool (Claude Code: PreToolUse), for the file-writing tools: Write, Edit,
# MultiEdit (Claude Code), write_file, replace (Gemini CLI). Reads tool_input.file_path
# and tool_input.path from the event on stdin.
# Answer: {"decision": "deny", "reason": ...} on stdout for a secrets file; no output (no
# opinion) otherwise. Exit 1 if the event is not JSON.
#
# Secrets files: .env and .env.* (not the templates .env.example, .sample, .template,
# .dist, .defaults), *.env; private keys (id_rsa, id_ed25519, …, *.pem, *.key, *.p12,
# *.pfx, *.jks, *.keystore, *.ppk); credentials files (credentials, credentials.json,
# .git-credentials, .netrc, .pgpass, .pypirc, .htpasswd, secrets.json/.yaml/.yml/.toml);
# anything in .ssh/, .gnupg/ or .aws/; .kube/config and .docker/config.json. Names are
# compared without regard to case, and a symbolic link is judged by its target too.
# Needs only core Perl (JSON::PP ships with Perl 5.14 and later).
use strict;
use warnings;
use Cwd qw(abs_path);
use JSON::PP ();

my $json = JSON::PP->new->utf8->canonical;
my $raw = do { local $/; <STDIN> } // '';
my $event = eval { $json->decode($raw) };
if (ref $event ne 'HASH') {
    my $why = $@ || "got $raw";
    $why =~ s/ at \S+ line \d+\.\n?\z//;
    print STDERR "protect_secrets.pl: the event is not a JSON object: $why\n";
    exit 1;
}
# File names reach the system as UTF-8 bytes, whatever Perl holds them as.
sub bytes_of { my ($text) = @_; utf8::encode($text); return $text }
my $cwd = $event->{cwd};
chdir bytes_of($cwd) if defined $cwd && !ref $cwd && -d bytes_of($cwd);
my $input = ref $event->{tool_input} eq 'HASH' ? $event->{tool_input} : {};

# What kind of secret PATH looks like, or undef.
sub secret_kind {
    my ($path) = @_;
    my @parts = grep { length } split m{/+}, lc $path;
    my $name = pop @parts // '';
    my %dirs = map { $_ => 1 } @parts;
    return 'a .env file with environment secrets'
        if ($name eq '.env' || $name =~ /^\.env\./ || $name =~ /\.env$/)
        && $name !~ /\.(example|sample|template|dist|defaults?)$/;
    return 'an SSH private key' if $name =~ /^id_(rsa|dsa|ecdsa|ed25519)(_sk)?$/;
    return 'a private key or certificate store' if $name =~ /\.(pem|key|p12|pfx|jks|keystore|ppk)$/;
    return 'a credentials file'
        if $name =~ /^(credentials(\.json)?|\.git-credentials|\.netrc|_netrc|\.pgpass|\.pypirc|\.htpasswd)$/
        || $name =~ /^secrets\.(json|ya?ml|toml)$/;
    for my $dir ('.ssh', '.gnupg', '.aws') {
        return "a file in $dir/" if $dirs{$dir};
    }
    return 'a cluster or registry login' if ($name eq 'config' && ($parts[-1] // '') eq '.kube')
        || ($name eq 'config.json' && ($parts[-1] // '') eq '.docker');
    return undef;
}

for my $field ('file_path', 'path') {
    my $path = $input->{$field};
    next unless defined $path && !ref $path && length $path;
    my $kind = secret_kind($path);
    my $file = bytes_of($path);
    if (!$kind && (-e $file || -l $file)) {  # a harmless name may link to a secret
        my $real = abs_path($file);
        if (defined $real && utf8::decode($real)) {
            $kind = secret_kind($real);
            $kind .= " (it links to $real)" if $kind;
        }
    }
    next unless $kind;
    print $json->encode({
        decision => 'deny',
        reason   => "Refusing to write '$path': it looks like $kind, which the agent must not "
            . "change. Put placeholders in a template such as .env.example instead, or ask "
            . "the user to make this change.",
    }), "\n";
    exit 0;
}
exit 0;
